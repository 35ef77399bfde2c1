// A Curator client driven line by line over stdin/stdout, so that the
// interop tests can put a real InterProcessMutex and LeaderLatch against
// distlock on the same ZooKeeper server.
//
// Usage: java CuratorPeer CONNECT_STRING
// Prints "ready" once connected, then answers one line per command:
//   mutex PATH WAIT_MS   -> "acquired NODE" or "timeout"
//   release              -> "released"
//   latch PATH ID        -> "started" (the latch campaigns in the background)
//   await WAIT_MS        -> "leader" or "not-leader"
//   has-leadership       -> "leader" or "not-leader"
//   unlatch              -> "closed"
//   leader PATH          -> "leader-id ID" or "no-leader"
// Failures print "error MESSAGE". On end of input it releases, closes and exits.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorPeer {
    /** Exposes the node of the held lock, which the recipe keeps protected. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10_000, 10_000, new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) {
            System.out.println("error not connected");
            System.exit(1);
        }
        System.out.println("ready");
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Mutex mutex = null;
        LeaderLatch latch = null;
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            try {
                switch (words[0]) {
                    case "mutex":
                        mutex = new Mutex(client, words[1]);
                        if (mutex.acquire(Long.parseLong(words[2]), TimeUnit.MILLISECONDS)) {
                            System.out.println("acquired " + mutex.node());
                        } else {
                            mutex = null;
                            System.out.println("timeout");
                        }
                        break;
                    case "release":
                        mutex.release();
                        mutex = null;
                        System.out.println("released");
                        break;
                    case "latch":
                        latch = new LeaderLatch(client, words[1], words[2]);
                        latch.start();
                        System.out.println("started");
                        break;
                    case "await":
                        boolean led = latch.await(Long.parseLong(words[1]), TimeUnit.MILLISECONDS);
                        System.out.println(led ? "leader" : "not-leader");
                        break;
                    case "has-leadership":
                        System.out.println(latch.hasLeadership() ? "leader" : "not-leader");
                        break;
                    case "unlatch":
                        latch.close();
                        latch = null;
                        System.out.println("closed");
                        break;
                    case "leader":
                        // A latch that never starts only reads the participants.
                        Participant leader = new LeaderLatch(client, words[1]).getLeader();
                        System.out.println(
                                leader.isLeader() ? "leader-id " + leader.getId() : "no-leader");
                        break;
                    default:
                        System.out.println("error unknown command " + words[0]);
                }
            } catch (Exception e) {
                System.out.println("error " + e);
            }
        }
        if (mutex != null) {
            mutex.release();
        }
        if (latch != null) {
            latch.close();
        }
        client.close();
    }
}
