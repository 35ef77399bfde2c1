#!/usr/bin/env python3
"""Checks docker/compose.yml without Docker: runs what each etcd and Redis
service would run, with the locally installed servers of the same versions
(scripts/install-servers.sh), on free loopback ports.

- etcd: the single node and the 3-node cluster start from their ETCD_*
  environment alone (as the distroless image's CMD /usr/local/bin/etcd would),
  etcd warns about no unrecognized ETCD_* variable, and the healthcheck passes.
  Compose host names (etcd, etcd-N) become 127.0.0.1 and container ports
  become free ports.
- Redis: each service's command line starts redis-server and the healthcheck
  answers; the redis-cluster profile's three nodes run with their exact
  arguments (they use the host network, ports 7001-7003), the one-shot
  redis-cluster-create command forms the cluster, and a second run of it
  leaves the cluster as it is.

ZooKeeper is not run: its image configures the server from ZOO_* variables
in its own entrypoint script, which Debian's package does not have.

Usage: python3 docker/check-offline.py   (needs python3-yaml)
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
COMPOSE = yaml.safe_load(open(os.path.join(HERE, "compose.yml")))
SERVICES = COMPOSE["services"]
procs = []
failures = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def wait(cmd, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0:
            return r
        time.sleep(0.3)
    return r


def start(cmd, env=None, log=None):
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def healthcheck_argv(service, rewrite=lambda a: a):
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[0] == "CMD", f"{service}: healthcheck is exec form"
    argv = [rewrite(a) for a in test[1:]]
    # The images keep etcdctl in /usr/local/bin; Debian in /usr/bin.
    argv[0] = shutil.which(os.path.basename(argv[0])) or argv[0]
    return argv


def check_etcd(names, tmp):
    """Start the etcd services `names` together from their environment."""
    ports = {n: (free_port(), free_port()) for n in names}

    def rewrite(value):
        for n, (client, peer) in ports.items():
            value = value.replace(f"http://{n}:2379", f"http://127.0.0.1:{client}")
            value = value.replace(f"http://{n}:2380", f"http://127.0.0.1:{peer}")
        return value

    started = {}
    for n in names:
        spec = SERVICES[n]
        assert "command" not in spec and "entrypoint" not in spec, n
        env = {k: str(v) for k, v in spec["environment"].items()}
        client, peer = ports[n]
        env = {k: rewrite(v) for k, v in env.items()}
        env["ETCD_LISTEN_CLIENT_URLS"] = f"http://127.0.0.1:{client}"
        env["ETCD_LISTEN_PEER_URLS"] = f"http://127.0.0.1:{peer}"
        env["ETCD_DATA_DIR"] = os.path.join(tmp, n)
        env["PATH"] = os.environ["PATH"]
        log = open(os.path.join(tmp, n + ".log"), "w+")
        started[n] = (start(["etcd"], env=env, log=log), log)
    for n in names:
        client, _ = ports[n]
        argv = healthcheck_argv(n) + [f"--endpoints=127.0.0.1:{client}"]
        r = wait(argv)
        check(r.returncode == 0, f"{n}: etcd starts from its ETCD_* environment, healthcheck passes")
    if len(names) > 1:
        client, _ = ports[names[0]]
        r = subprocess.run(["etcdctl", f"--endpoints=127.0.0.1:{client}", "member", "list"],
                           capture_output=True, text=True)
        check(r.stdout.count("started") == len(names), f"{', '.join(names)}: one cluster of {len(names)} members")
    for n, (p, log) in started.items():
        stop(p)
        log.seek(0)
        text = log.read()
        bad = re.findall(r"unrecognized environment variable[^\n]*", text)
        check(not bad, f"{n}: etcd knows every ETCD_* variable" + (f" {bad}" if bad else ""))


def last_line(result):
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr).strip()
    return text.splitlines()[-1] if text else ""


def redis_argv(service, port):
    cmd = list(SERVICES[service]["command"])
    assert cmd[0] == "redis-server", service
    return cmd + ["--port", str(port), "--bind", "127.0.0.1", "--daemonize", "no"]


def check_redis(tmp):
    for n in ["redis", "redis2", "redis3"]:
        port = free_port()
        p = start(redis_argv(n, port), log=subprocess.DEVNULL)
        argv = healthcheck_argv(n)
        r = wait(argv[:1] + ["-p", str(port)] + argv[1:])
        check(r.returncode == 0 and "PONG" in r.stdout, f"{n}: redis-server runs its command, healthcheck passes")
        stop(p)


def check_redis_cluster(tmp):
    nodes = ["redis-c1", "redis-c2", "redis-c3"]
    busy = [p for p in (7001, 7002, 7003, 17001, 17002, 17003)
            if socket.socket().connect_ex(("127.0.0.1", p)) == 0]
    if busy:
        check(False, f"redis-cluster: ports {busy} are in use here, not run")
        return
    for n in nodes:
        spec = SERVICES[n]
        assert spec.get("network_mode") == "host", n
        # Each node writes its nodes-700N.conf into the working directory
        # (the image's /data; here the temporary directory).
        start(spec["command"], log=open(os.path.join(tmp, n + ".log"), "w"))
    for n in nodes:
        r = wait(healthcheck_argv(n))
        check(r.returncode == 0, f"{n}: cluster node runs its command, healthcheck passes")
    create = SERVICES["redis-cluster-create"]
    check(set(create["depends_on"]) == set(nodes), "redis-cluster-create waits for the three nodes")
    for attempt in ("first", "second"):
        r = subprocess.run(create["command"], capture_output=True, text=True, cwd=tmp)
        check(r.returncode == 0, f"redis-cluster-create, {attempt} run: exit 0, says {last_line(r)!r}")
    r = wait(["redis-cli", "-p", "7001", "cluster", "info"])
    check("cluster_state:ok" in r.stdout and "cluster_size:3" in r.stdout, "redis-cluster: cluster_state:ok, 3 masters")


def main():
    tmp = tempfile.mkdtemp(prefix="distlock-compose-check.")
    cwd = os.getcwd()
    os.chdir(tmp)  # redis-server writes nodes-*.conf here
    try:
        check_etcd(["etcd"], tmp)
        check_etcd(["etcd-1", "etcd-2", "etcd-3"], tmp)
        check_redis(tmp)
        check_redis_cluster(tmp)
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
