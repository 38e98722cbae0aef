"""Where the product's data folders live (templates/, boards/, calibration_data/ at the project top level)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
BOARDS = ROOT / "boards"
CALIBRATION_DATA = ROOT / "calibration_data"
