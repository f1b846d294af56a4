import assert from "node:assert/strict";
import { MAX_QUEUE_NAME_LENGTH, RoutingError, validateQueueName } from "../../mod.ts";
import { suggestQueueName } from "../../src/routing/queue_name.ts";

Deno.test("validateQueueName accepts canonical lowercase names up to 47 characters", () => {
  for (
    const name of ["a", "thread_processing", "slack_delivery", "q1", "trailing_", "x".repeat(47)]
  ) {
    validateQueueName(name);
  }
  assert.equal(MAX_QUEUE_NAME_LENGTH, 47);
});

Deno.test("validateQueueName rejects and says what to write instead", () => {
  const cases: [string, RegExp][] = [
    ["Thread_Processing", /"Thread_Processing" is invalid.*write "thread_processing" instead/],
    ["thread-processing", /write "thread_processing" instead/],
    ["Thread Processing", /write "thread_processing" instead/],
    ["1queue", /starting with a letter; write "queue" instead/],
    ["_queue", /write "queue" instead/],
    [
      "thread__processing",
      /contains "__", which is reserved for generated private step queues; write "thread_processing" instead/,
    ],
    ["", /is empty; write a name such as "thread_processing"/],
    ["q".repeat(48), /48 characters long; PGMQ allows at most 47, so shorten it/],
  ];
  for (const [name, message] of cases) {
    assert.throws(() => validateQueueName(name), RoutingError, name);
    assert.throws(() => validateQueueName(name), message, name);
  }
});

Deno.test("validateQueueName names what the queue is for", () => {
  assert.throws(
    () => validateQueueName("Bad", 'queue of step "enrich"'),
    /^RoutingError: queue of step "enrich" "Bad"/,
  );
});

Deno.test("suggestQueueName always returns a valid name", () => {
  for (const input of ["Thread-Processing", "__x__y__", "123", "", "ÄÖÜ queue", "A".repeat(80)]) {
    const suggestion = suggestQueueName(input);
    validateQueueName(suggestion);
  }
  assert.equal(suggestQueueName("Thread-Processing"), "thread_processing");
});
