"""Entry point `pulumi up` runs (Pulumi.yaml: main: infra/)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Import `infra` as a package and `hanzo_stream` from this checkout; drop infra/ itself
# from the path so its modules (tls, spark, ...) cannot shadow top-level packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from infra.program import main  # noqa: E402

main()
