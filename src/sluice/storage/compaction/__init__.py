"""Log compaction (Kafka's LogCleaner): keep the last record of each key in the closed segments of topics
whose cleanup.policy contains `compact`. The modules, in the order a pass uses them:

- `checkpoint`  `cleaner.checkpoint` per partition: how far the log is clean, and when each cleaned segment
                was first cleaned (tombstone clocks); layout in docs/storage.md.
- `plan`        which segments are cleanable and whether a pass is due (dirty ratio, max.compaction.lag.ms,
                tombstones due), and how they group into cleaned segments.
- `offset_map`  the key map of the dirty segments, and each batch's fate under transactions (`TxnFacts`).
- `rewrite`     the heavy part of a pass (in a worker process): write each group's cleaned segment into
                `<partition>/.cleaning/`.
- `swap`        put a cleaned segment in place of the ones it replaces, crash-safe (`cleaner.swap`).
- `cleaner`     one pass over one partition (Kafka's Cleaner): plan -> map -> rewrite -> swap -> checkpoint.
- `worker`      the worker process a cleaner thread hands the rewrite to.
- `manager`     the threads and per-partition cleaner state (Kafka's LogCleanerManager): which partition
                next, what each one's checkpoint and dirty ratio are, which ones are uncleanable.

One pass over one partition, as Kafka's Cleaner does it:
1. Plan. The cleanable segments are the sealed, already durable ones (never the active segment), up to
   the first whose newest record is younger than min.compaction.lag.ms. Those below the cleaner's
   checkpoint ("first dirty offset") were cleaned before; the rest are dirty. A pass runs when
   dirty / (clean + dirty) bytes reaches min.cleanable.dirty.ratio, when dirty data is older than
   max.compaction.lag.ms, or when kept tombstones have outlived delete.retention.ms.
2. Map. The dirty segments are read into an `OffsetMap` (key digest -> last offset) until its memory
   budget (log_cleaner_dedupe_buffer_size) is spent; the map then ends at a segment boundary.
3. Rewrite. Every cleanable segment up to the map's end is copied, in groups no larger than
   segment.bytes, into a new segment under `<partition>/.cleaning/`, keeping a record only when no later
   record of its key is in the map. Offsets, timestamps and headers never change (the log gets gaps); a
   batch that loses records is re-encoded with its own codec, base offset, lastOffsetDelta and producer
   fields; a batch that loses none is copied byte for byte.
4. Swap, on the thread that owns the log (the event loop), in a few file renames: see
   `DiskPartitionLog.swap_cleaned` and `loader.settle_cleaner_swap` for the crash protocol.

Tombstones (null values) are kept for delete.retention.ms after the pass that first cleaned their
segment; the time is remembered per segment in the cleaner checkpoint, and a segment still holding
tombstones is never grouped with another, so merging cannot move any tombstone's deadline.

Transactions (`TxnFacts`, taken from the owner's producer state when the pass starts): a transactional
batch that ends at or above the last stable offset may still be in an open transaction, so it is copied
unchanged and never enters the map. Below the LSO every transaction is decided: a batch inside an
aborted transaction of the aborted-transaction index is removed (its index entry stays, so read_committed
readers positioned before the gap still filter correctly); a committed one is compacted by key like any
other. A COMMIT marker stays while any batch of its transaction is left; once none is, it is treated
like a tombstone and removed delete.retention.ms after its segment was first cleaned, as in Kafka. ABORT
markers are kept (see `rewrite.clean_marker`).

Producer state is rebuilt from batch headers at start, so the newest data batch of each producer is never
removed whole: when all its records go it is kept as an empty batch with its offsets and sequence, as
Kafka does, so an idempotent producer that outlives a broker restart does not see a sequence gap.

Keyless records (possible only from before the topic became compacted) are removed, as Kafka does.

The log (sluice.storage.disk) knows nothing of this package: it offers `cleanable_segments` and
`swap_cleaned`, and the storage engine hands out such logs through `Storage.compactable_log`.
"""
