# A redis-py Lock driven over stdin, one command a line, one answer a line:
#   try      -> acquired | busy      (acquire(blocking=False))
#   wait     -> acquired | timeout   (blocking, up to 20 s)
#   release  -> released | error <why>
#   extend   -> extended | error <why>   (reacquire: the TTL anew)
#   value    -> the token it holds (or none)
# Arguments: port, lock name, TTL in milliseconds.
import sys

import redis

port, name, ttl_ms = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
lock = client.lock(name, timeout=ttl_ms / 1000, sleep=0.01)


def say(line):
    print(line, flush=True)


say("ready")
for command in sys.stdin:
    command = command.strip()
    try:
        if command == "try":
            say("acquired" if lock.acquire(blocking=False) else "busy")
        elif command == "wait":
            say("acquired" if lock.acquire(blocking=True, blocking_timeout=20) else "timeout")
        elif command == "release":
            lock.release()
            say("released")
        elif command == "extend":
            lock.reacquire()
            say("extended")
        elif command == "value":
            token = lock.local.token
            say(token.decode() if token else "none")
        else:
            say("error unknown command " + command)
    except redis.exceptions.LockError as e:
        say("error " + type(e).__name__ + ": " + str(e).replace("\n", " "))
