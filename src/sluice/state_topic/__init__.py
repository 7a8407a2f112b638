"""State topics: a compacted one-partition topic used as the log of a pure state machine.

Every piece of state sluice keeps in Kafka lives this way: the group coordinator's (`__consumer_offsets`),
the transaction coordinator's (`__transaction_state`) and the schema registry's (`_schemas`). One
contract (api.py), two backends that differ only in where records come from and go to:

    api.py    the contract: `StateMachine` (what a topic is replayed into), `StateTopic` (the replay rule,
              shared by both backends), `topic_config` (one partition, cleanup.policy=compact)
    local.py  `LocalStateTopic`: a topic of the broker's own log, for state the broker keeps itself; and
              `StateTopicService`, the broker service around one (loading and unloading)
    kafka.py  `KafkaStateTopic`: a topic of any Kafka cluster, written by a producer and tailed by a
              consumer, for a service that talks to Kafka as a client

The contract:
- the machine is pure: no I/O, no clock (time comes in as `now_ms`);
- replay: `apply(key, value)` for every record, in offset order, once; a record `apply` raises on is
  skipped, loudly, and the replay goes on; then `loaded(now_ms)`, whose records are appended;
- writes: the records that describe a change are appended, and whoever asked for the change is answered
  only once they are durable. On the local backend the broker is the only writer, so its machine runs
  ahead of the log: a call changes the machine and returns the records, and the reply waits for the group
  commit. On the Kafka backend other processes write too, so the log runs ahead of the machine: a writer
  appends, and `append` returns once this process's reader has applied the records.

Adding a state topic to the broker (the share-group state `__share_group_state` is the next one):
1. The machine, in coordinator/ (coordinator/share/ for share groups): `apply(key, value)` folds one record
   of the topic's key/value layout (Kafka's, written with the codec of protocol/), a tombstone deletes;
   `loaded(now_ms)` finishes the load (timers start at `now_ms`) and returns the records to append, usually
   none. Each call takes `now_ms` and returns its answer, the records to persist, and what timers it wants
   (`next_deadline`, `tick`), as GroupCoordinator and TransactionCoordinator do. Test it as pure code:
   drive it, replay its records into a fresh one, compare.
2. The service, in broker/ (like group_service.py): a `StateTopicService[YourMachine]` made with the
   broker, the topic's name, its segment size and a `new_machine` factory (it opens the topic, created
   if missing). Each call: `ensure_loaded(now_ms)` first (NOT_COORDINATOR when it cannot load),
   `refusal(now_ms)` before a call that writes (then `unload`, so the machine never runs ahead of a log
   that refused it), run the machine, `persist(records, now_ms)` (on KafkaError, DiskFull or OSError:
   `unload`), and hold the reply until the group commit has made the topic durable:
   `broker.ready_replies.append((token, response, (NAME, 0)))`. `on_unloaded` answers what the service
   holds; `on_loaded` finishes what the log shows half done.
3. Wire it up: an `attach_...(broker, now_ms)` beside the service makes it, sets it on the broker, appends
   it to `broker.services` (the broker's timer asks each for `next_deadline` and calls its `tick`, in
   the order they were appended) and calls `load`; server/app.py's `build_broker` calls attach, after groups and transactions. The segment
   size is a broker setting (broker/config.py), and the record layout goes in docs/storage.md.

A full disk: a write refused with DiskFull is reported to the broker's free-space guard (produce and
every service's timers stop writing), the service unloads, its callers hear NOT_COORDINATOR and look for
the coordinator again, and the first call once the disk has room loads the machine from the topic again.

A service that talks to any Kafka (the registry) instead starts a `KafkaStateTopic(settings, name,
machine)`, writes with `await sync()`, plan on the caught-up machine, `await append(records)`, and hears
`StoreUnavailable` when Kafka does not answer in time.
"""
