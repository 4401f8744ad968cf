"""Times markitdown on the given files (HTML pages, documents), for sibyl's benchmarks.

Usage: python markitdown_bench.py REPEATS FILE...
Prints one JSON object: {file: median milliseconds per conversion}.
"""
import json
import statistics
import sys
import time

from markitdown import MarkItDown


def main() -> None:
    repeats = int(sys.argv[1])
    md = MarkItDown()
    result = {}
    for path in sys.argv[2:]:
        md.convert(path)  # warm-up (imports, caches)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            md.convert(path)
            times.append(time.perf_counter() - t)
        result[path] = statistics.median(times) * 1000.0
    print(json.dumps(result))


if __name__ == "__main__":
    main()
