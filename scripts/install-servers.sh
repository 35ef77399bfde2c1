#!/usr/bin/env bash
# Installs the real servers the distlock tests run (etcd, Redis, ZooKeeper,
# PostgreSQL, MariaDB),
# protoc, and the peer clients and tools the interop and filesystem tests
# use, from Debian/Ubuntu packages, if they are missing.
#
# Idempotent: when everything is present it only prints what it checked and
# exits without touching apt. Uses sudo when not root (and sudo exists).
#
#   etcd, etcdctl            etcd-server, etcd-client
#   redis-server, redis-cli  redis-server, redis-tools
#   zookeeper.jar + java     zookeeper (depends on a Java runtime and on the
#                            slf4j/log4j jars the launcher puts on the classpath)
#   initdb, postgres, psql   postgresql (under /usr/lib/postgresql/*/bin; the
#                            package also creates the postgres user the server
#                            runs as when the tests run as root)
#   mariadbd, mariadb        mariadb-server, mariadb-client (the package's
#   mariadb-install-db       service is kept from starting: the tests start
#                            their own servers; it creates the mysql user the
#                            server runs as when the tests run as root)
#   protoc                   protobuf-compiler (etcd-client crate build)
#   google/protobuf/*.proto  libprotobuf-dev (the well-known types protoc
#                            imports; protobuf-compiler does not ship them)
#   openssl                  openssl (the Redis TLS test makes its certificates)
#   javac + Curator jars     default-jdk-headless, libcurator-recipes-java (the
#                            ZooKeeper interop test compiles a Curator client)
#   ip                       iproute2 (isolatable etcd clusters run members in
#                            network namespaces of their own)
#   python3 yaml             python3-yaml (docker/check-offline.py reads
#                            docker/compose.yml)
#   python3 redis            python3-redis (the Redis layout=plain interop
#                            test runs redis-py's Lock under /usr/bin/python3)
#   node, npm                nodejs, npm; then node-redlock 4 and ioredis 5
#                            from the npm registry (Debian packages neither)
#                            into $DISTLOCK_NODE_DIR (default
#                            /usr/local/lib/distlock-node), for the same test
#   mkfs.vfat + fusefat      dosfstools, fusefat (the file backend's test on a
#                            case-insensitive filesystem, mounted through FUSE)
set -euo pipefail

JAR_DIR=/usr/share/java
missing=()

need() { # need <package> <description> <test...>
    local package=$1 what=$2
    shift 2
    if "$@" >/dev/null 2>&1; then
        printf 'ok       %s\n' "$what"
    else
        printf 'missing  %s (apt package %s)\n' "$what" "$package"
        missing+=("$package")
    fi
}

need etcd-server       "etcd"                        command -v etcd
need etcd-client       "etcdctl"                     command -v etcdctl
need redis-server      "redis-server"                command -v redis-server
need redis-tools       "redis-cli"                   command -v redis-cli
need zookeeper         "$JAR_DIR/zookeeper.jar"      test -f "$JAR_DIR/zookeeper.jar"
need libslf4j-java     "$JAR_DIR/slf4j-log4j12.jar"  test -f "$JAR_DIR/slf4j-log4j12.jar"
need liblog4j1.2-java  "$JAR_DIR/log4j-1.2.jar"      test -f "$JAR_DIR/log4j-1.2.jar"
need default-jre-headless "java"                     command -v java
need postgresql        "PostgreSQL initdb"          compgen -G "/usr/lib/postgresql/*/bin/initdb"
need mariadb-server    "mariadbd"                    test -x /usr/sbin/mariadbd
need mariadb-server    "mariadb-install-db"          command -v mariadb-install-db
need mariadb-client    "mariadb"                     command -v mariadb
need protobuf-compiler "protoc"                      command -v protoc
need libprotobuf-dev   "google/protobuf/descriptor.proto" test -f /usr/include/google/protobuf/descriptor.proto
need openssl           "openssl"                     command -v openssl
need default-jdk-headless "javac"                    command -v javac
need libcurator-recipes-java "$JAR_DIR/curator-recipes.jar" test -f "$JAR_DIR/curator-recipes.jar"
need dosfstools        "mkfs.vfat"                   command -v mkfs.vfat
need fusefat           "fusefat"                     command -v fusefat
need iproute2          "ip"                          command -v ip
need python3-yaml      "python3 yaml"                python3 -c 'import yaml'
need python3-redis     "python3 redis"               /usr/bin/python3 -c 'import redis'
need nodejs            "node"                        command -v node
need npm               "npm"                         command -v npm

NODE_DIR=${DISTLOCK_NODE_DIR:-/usr/local/lib/distlock-node}
node_modules() { # node-redlock and ioredis under $NODE_DIR, from npm if missing
    if NODE_PATH="$NODE_DIR/node_modules" node -e "require('redlock'); require('ioredis')" >/dev/null 2>&1; then
        printf 'ok       %s\n' "node-redlock in $NODE_DIR"
    else
        echo "installing node-redlock 4 and ioredis 5 into $NODE_DIR (npm)"
        mkdir -p "$NODE_DIR"
        npm install --prefix "$NODE_DIR" --no-audit --no-fund --silent redlock@4 ioredis@5
    fi
}

if [ ${#missing[@]} -eq 0 ]; then
    node_modules
    echo "all servers present"
    exit 0
fi

# Deduplicate, keep order.
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "error: need root (or sudo) to install: ${packages[*]}" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: apt-get not found; install these packages by hand: ${packages[*]}" >&2
    exit 1
fi

echo "installing: ${packages[*]}"
"${as_root[@]}" apt-get update -qq
# A package's maintainer script must not start its service (MariaDB's would
# take port 3306 and a system data directory): a policy-rc.d that exits 101
# says no to invoke-rc.d for the install. Whatever policy-rc.d was there
# before is put back afterwards.
policy=/usr/sbin/policy-rc.d
saved_policy=$(mktemp /tmp/distlock-policy-rc.d.XXXX)
had_policy=false
if [ -e "$policy" ]; then
    cp -p "$policy" "$saved_policy"
    had_policy=true
fi
restore_policy() {
    if [ "$had_policy" = true ]; then
        "${as_root[@]}" cp -p "$saved_policy" "$policy"
    else
        "${as_root[@]}" rm -f "$policy"
    fi
    rm -f "$saved_policy"
}
trap restore_policy EXIT
printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
"${as_root[@]}" chmod 755 "$policy"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${packages[@]}"
restore_policy
trap - EXIT

# Verify: fail loudly rather than let the tests fail later.
for check in etcd etcdctl redis-server redis-cli java javac protoc openssl mkfs.vfat fusefat ip \
    mariadb mariadb-install-db; do
    command -v "$check" >/dev/null || { echo "error: $check still missing" >&2; exit 1; }
done
for jar in zookeeper curator-recipes; do
    test -f "$JAR_DIR/$jar.jar" || { echo "error: $JAR_DIR/$jar.jar still missing" >&2; exit 1; }
done
test -x /usr/sbin/mariadbd ||
    { echo "error: /usr/sbin/mariadbd still missing (mariadb-server)" >&2; exit 1; }
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null ||
    { echo "error: /usr/lib/postgresql/*/bin/initdb still missing (postgresql)" >&2; exit 1; }
test -f /usr/include/google/protobuf/descriptor.proto ||
    { echo "error: google/protobuf/descriptor.proto still missing (libprotobuf-dev)" >&2; exit 1; }
python3 -c 'import yaml' 2>/dev/null ||
    { echo "error: python3 yaml still missing (python3-yaml)" >&2; exit 1; }
/usr/bin/python3 -c 'import redis' 2>/dev/null ||
    { echo "error: python3 redis still missing (python3-redis)" >&2; exit 1; }
node_modules
echo "all servers installed"
