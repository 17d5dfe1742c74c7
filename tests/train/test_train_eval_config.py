"""`factory train-eval` flags come from TrainEvalConfig: each field's description is its help."""

from __future__ import annotations

import subprocess
import sys

from demofactory.cli.main import build_parser
from demofactory.train.config import TrainEvalConfig


def test_every_field_has_a_flag_with_its_description(capsys):
    parser = build_parser()
    try:
        parser.parse_args(["train-eval", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for name, field in TrainEvalConfig.model_fields.items():
        assert field.description, f"TrainEvalConfig.{name} has no description"
        assert f"--{name.replace('_', '-')}" in text
        assert " ".join(field.description.split()) in text, name


def test_building_the_parser_does_not_import_torch():
    # Every command pays the parser's imports: torch alone took ~8 s to import on 2 cores.
    code = (
        "import sys, demofactory.cli.main; demofactory.cli.main.build_parser(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
