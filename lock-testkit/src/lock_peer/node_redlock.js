// A node-redlock (v4, over ioredis) lock on one server, driven over stdin
// like redis_py.py: try, wait, release, extend, value.
// Arguments: port, lock name, TTL in milliseconds.
const readline = require("readline");
const Redis = require("ioredis");
const Redlock = require("redlock");

// The last three arguments (`node -e` puts no script path before them).
const [portText, name, ttlText] = process.argv.slice(-3);
const [port, ttlMs] = [Number(portText), Number(ttlText)];
const client = new Redis({ host: "127.0.0.1", port, commandTimeout: 5000 });
const once = new Redlock([client], { retryCount: 0 });
const patient = new Redlock([client], { retryCount: 2000, retryDelay: 10, retryJitter: 5 });
let held = null;

const say = (line) => process.stdout.write(line + "\n");
const commands = {
  try: async () => { held = await once.lock(name, ttlMs); return "acquired"; },
  wait: async () => { held = await patient.lock(name, ttlMs); return "acquired"; },
  release: async () => { await held.unlock(); held = null; return "released"; },
  extend: async () => { held = await held.extend(ttlMs); return "extended"; },
  value: async () => (held ? held.value : "none"),
};

client.on("ready", () => {
  say("ready");
  const input = readline.createInterface({ input: process.stdin });
  let queue = Promise.resolve();
  input.on("line", (line) => {
    const command = commands[line.trim()];
    queue = queue.then(async () => {
      if (!command) return say("error unknown command " + line);
      try {
        say(await command());
      } catch (e) {
        const busy = e.name === "LockError" && (line.trim() === "try" || line.trim() === "wait");
        say(busy ? (line.trim() === "try" ? "busy" : "timeout") : "error " + e.name + ": " + e.message);
      }
    });
  });
  input.on("close", () => queue.then(() => client.disconnect()));
});
