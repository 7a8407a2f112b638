"""Child process for the SIGKILL test: appends forever on the main thread while a worker thread does
group-commit flushes, printing "<batch number> <offset>" for every batch a returned flush covered."""

from __future__ import annotations

import sys
import threading

from storage_batches import make_batch, values_of

from sluice.storage import DiskStorage

NOW = 1_700_000_000_000


def batch_for(n: int) -> tuple[bytes, object]:
    return make_batch(values_of(3, 60, prefix=f"batch{n}-"), [NOW + n] * 3)


def main(data_dir: str) -> None:
    storage = DiskStorage(data_dir)
    if storage.topic("crash") is None:
        storage.create_topic("crash", 1, {"segment.bytes": "20000", "index.interval.bytes": "512"})
    log = storage.log("crash", 0)
    appended: list[tuple[int, int]] = []

    def flusher() -> None:
        printed = 0
        while True:
            covered = len(appended)
            log.flush()
            lines = "".join(f"{n} {offset}\n" for n, offset in appended[printed:covered])
            printed = covered
            if lines:
                sys.stdout.write(lines)
                sys.stdout.flush()

    threading.Thread(target=flusher, daemon=True).start()
    n = 0
    while True:
        batch, header = batch_for(n)
        appended.append((n, log.append(batch, header, append_time_ms=NOW)))  # type: ignore[arg-type]
        n += 1


if __name__ == "__main__":
    main(sys.argv[1])
