"""Entry point `pulumi up` runs (Pulumi.yaml: main: infra/)."""

import sys
from pathlib import Path

# The program imports `infra` as a package and `hanzo_stream` from this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.program import main  # noqa: E402

main()
