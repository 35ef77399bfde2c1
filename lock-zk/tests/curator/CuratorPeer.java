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

    private final CuratorFramework client;
    private Mutex mutex;
    private LeaderLatch latch;

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
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
        CuratorPeer peer = new CuratorPeer(client);
        String line;
        while ((line = in.readLine()) != null) {
            String answer;
            try {
                answer = peer.answer(line.trim().split(" "));
            } catch (Exception e) {
                answer = "error " + e;
            }
            System.out.println(answer);
        }
        peer.close();
        client.close();
    }

    /** The answer line to one command, split into words. */
    private String answer(String[] words) throws Exception {
        return switch (words[0]) {
            case "mutex" -> acquire(words[1], Long.parseLong(words[2]));
            case "release" -> {
                mutex.release();
                mutex = null;
                yield "released";
            }
            case "latch" -> {
                latch = new LeaderLatch(client, words[1], words[2]);
                latch.start();
                yield "started";
            }
            case "await" -> leadership(latch.await(Long.parseLong(words[1]), TimeUnit.MILLISECONDS));
            case "has-leadership" -> leadership(latch.hasLeadership());
            case "unlatch" -> {
                latch.close();
                latch = null;
                yield "closed";
            }
            case "leader" -> leaderOf(words[1]);
            default -> "error unknown command " + words[0];
        };
    }

    /** Waits up to `waitMs` for the mutex at `path`. */
    private String acquire(String path, long waitMs) throws Exception {
        Mutex wanted = new Mutex(client, path);
        if (!wanted.acquire(waitMs, TimeUnit.MILLISECONDS)) {
            return "timeout";
        }
        mutex = wanted;
        return "acquired " + mutex.node();
    }

    private static String leadership(boolean leads) {
        return leads ? "leader" : "not-leader";
    }

    /** The leader of the latch at `path`: a latch that never starts only reads the participants. */
    private String leaderOf(String path) throws Exception {
        Participant leader = new LeaderLatch(client, path).getLeader();
        return leader.isLeader() ? "leader-id " + leader.getId() : "no-leader";
    }

    /** Gives up whatever is still held, at the end of input. */
    private void close() throws Exception {
        if (mutex != null) {
            mutex.release();
        }
        if (latch != null) {
            latch.close();
        }
    }
}
