"""The reference pages in docs/ match the code: the config page is generated, metric names exist."""
import re
from pathlib import Path

from curriculum import metrics
from curriculum.config import valid_keys
from curriculum.config.docs import COMMAND, PAGE, page

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_page_is_generated_from_the_schema():
    assert PAGE.read_text() == page(), f"docs/configuration.md is out of date: run `{COMMAND}`"


def test_every_config_key_documented():
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", PAGE.read_text(), flags=re.M))
    assert documented == set(valid_keys()), f"run `{COMMAND}`"
