"""markitdown on the same fixture files as server/examples/browser_bench.rs.

python tests/benches/markitdown_docs_bench.py [DOCS_DIR] [ITERATIONS]  (markitdown in a venv:
pip install 'markitdown[pdf,docx,pptx,xlsx]'). Prints mean ms per conversion per file.
"""
import os, sys, time
from markitdown import MarkItDown

docs = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "documents")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
md = MarkItDown()
print("file\tbytes\tms_per_file")
for name in sorted(os.listdir(docs)):
    if not name.startswith("test"):
        continue
    path = os.path.join(docs, name)
    md.convert(path)  # warm-up
    t = time.perf_counter()
    for _ in range(n):
        md.convert(path)
    per = (time.perf_counter() - t) / n
    print(f"{name}\t{os.path.getsize(path)}\t{per * 1e3:.3f}")
