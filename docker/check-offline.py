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

- PostgreSQL: the service's command is `postgres` with settings this
  version knows; a fresh cluster (as the image's entrypoint makes one) runs
  with the command's arguments and answers the healthcheck (pg_isready).
- Compose: the file validates against the Compose schema with every
  profile (`docker compose config -q`, or Debian's `docker-compose`, when one
  is installed; both run without an engine).
- Versions: each image's tag is the version of the locally installed server
  the tests run.

ZooKeeper is not run: its image configures the server from ZOO_* variables
in its own entrypoint script, which Debian's package does not have.

Usage: python3 docker/check-offline.py   (needs python3-yaml)
"""

import glob
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
    r = subprocess.run(create["command"], capture_output=True, text=True, cwd=tmp)
    check(r.returncode == 0, f"redis-cluster-create, first run: exit 0, says {last_line(r)!r}")
    # The nodes agree on the slots a moment after the create returns.
    info = ["sh", "-c", "redis-cli -p 7001 cluster info | grep -q cluster_state:ok"]
    r = wait(info)
    check(r.returncode == 0, "redis-cluster: cluster_state:ok")
    r = subprocess.run(["redis-cli", "-p", "7001", "cluster", "info"], capture_output=True, text=True)
    check("cluster_size:3" in r.stdout, "redis-cluster: 3 masters")
    # A later `up`, on the standing cluster.
    r = subprocess.run(create["command"], capture_output=True, text=True, cwd=tmp)
    check(r.returncode == 0 and "already created" in r.stdout,
          f"redis-cluster-create, second run: exit 0, says {last_line(r)!r}")


def check_compose_schema():
    profiles = sorted({p for spec in SERVICES.values() for p in spec.get("profiles", [])})
    args = ["-f", os.path.join(HERE, "compose.yml")]
    for profile in profiles:
        args += ["--profile", profile]
    for compose in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(compose[0]) is None:
            continue
        if subprocess.run(compose + ["version"], capture_output=True).returncode != 0:
            continue
        r = subprocess.run(compose + args + ["config", "-q"], capture_output=True, text=True)
        check(r.returncode == 0, f"{' '.join(compose)} config -q, profiles {profiles}: valid"
              + (f" ({last_line(r)})" if r.returncode else ""))
        return
    print("skip  no docker compose or docker-compose here: the Compose schema is not checked")


def installed_versions():
    """The versions of the servers the tests run, as installed here."""
    def first(pattern, argv):
        r = subprocess.run(argv, capture_output=True, text=True)
        m = re.search(pattern, r.stdout + r.stderr)
        return m.group(1) if m else None

    jars = os.listdir("/usr/share/java") if os.path.isdir("/usr/share/java") else []
    zk = [m.group(1) for j in jars if (m := re.fullmatch(r"zookeeper-(\d+\.\d+\.\d+)\.jar", j))]
    return {
        "quay.io/coreos/etcd": first(r"etcd Version: (\S+)", ["etcd", "--version"]),
        "redis": first(r"v=(\S+)", ["redis-server", "--version"]),
        "zookeeper": zk[0] if zk else None,
        "postgres": first(r"\(PostgreSQL\) (\S+)", [postgres_bin("postgres"), "--version"]),
    }


# Images whose tag needs to match the installed server's major version only.
# PostgreSQL's minor releases are bug fixes with the same protocol and data
# format, and Debian ships a new one every quarter: a machine may have any.
MAJOR_ONLY = {"postgres"}


def check_versions():
    installed = installed_versions()
    for name, spec in SERVICES.items():
        repo, _, tag = spec["image"].rpartition(":")
        want = installed.get(repo)
        tag = tag.lstrip("v")
        if repo in MAJOR_ONLY:
            same = want is not None and tag.split(".")[0] == want.split(".")[0]
            what = "major version"
        else:
            same = tag == want
            what = "version"
        check(same, f"{name}: image {spec['image']} is the tests' {what} ({want or 'not installed'})")


def postgres_bin(program):
    """A PostgreSQL server program: Debian keeps them out of PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"))
    return found[-1] if found else (shutil.which(program) or program)


def check_postgres(tmp):
    spec = SERVICES["postgres"]
    cmd = list(spec["command"])
    check(cmd[0] == "postgres", "postgres: the command runs the server (the entrypoint's documented form)")
    described = subprocess.run([postgres_bin("postgres"), "--describe-config"],
                               capture_output=True, text=True).stdout
    known = {line.split("\t", 1)[0] for line in described.splitlines()}
    settings = [cmd[i + 1].split("=", 1)[0] for i, a in enumerate(cmd) if a == "-c"]
    unknown = [name for name in settings if name not in known]
    check(settings and not unknown, f"postgres: this version knows every -c setting {settings}"
          + (f", not {unknown}" if unknown else ""))

    # initdb and the server refuse to run as root; the image runs them as
    # its postgres user too.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = os.path.join(tmp, "postgres")
    os.mkdir(data, 0o700)
    if as_user:
        os.chmod(tmp, 0o755)
        shutil.chown(data, "postgres", "postgres")
    r = subprocess.run(as_user + [postgres_bin("initdb"), "-D", data, "-U", "postgres", "--auth=trust"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"postgres: initdb failed: {last_line(r)}")
        return
    port = free_port()
    p = start(as_user + [postgres_bin("postgres"), "-D", data, "-p", str(port), "-k", data,
                         "-c", "listen_addresses=127.0.0.1"] + cmd[1:],
              log=open(os.path.join(tmp, "postgres.log"), "w"))
    argv = healthcheck_argv("postgres")
    r = wait(argv + ["-p", str(port)])
    check(r.returncode == 0, "postgres: the server runs with the command's arguments, healthcheck passes")
    stop(p)


def main():
    tmp = tempfile.mkdtemp(prefix="distlock-compose-check.")
    cwd = os.getcwd()
    os.chdir(tmp)  # redis-server writes nodes-*.conf here
    try:
        check_compose_schema()
        check_etcd(["etcd"], tmp)
        check_etcd(["etcd-1", "etcd-2", "etcd-3"], tmp)
        check_redis(tmp)
        check_redis_cluster(tmp)
        check_postgres(tmp)
        check_versions()
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
