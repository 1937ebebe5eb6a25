"""The naming rules (analysis/data/rules) load through one typed loader: every built-in file fits
its schema, and a file that does not fails with one line naming the file and the key."""
from __future__ import annotations

import pytest

from analysis.errors import AnalysisError
from analysis.rules import RULES_DIR, load_rules, load_rules_file
from analysis.rules_schema import (HostSyncs, KernelClasses, KernelFamilies, ModuleMapRules, NamedRules, NameKeys, Roles,
                                   StepLabels)

SCHEMAS = {"kernel_classes.yaml": KernelClasses, "module_map.yaml": ModuleMapRules, "roles.yaml": Roles,
           "step_labels.yaml": StepLabels, "kernel_families.yaml": KernelFamilies, "name_keys.yaml": NameKeys,
           "host_syncs.yaml": HostSyncs, "structure_rules.yaml": NamedRules, "module_rules.yaml": NamedRules}


def test_every_rule_file_has_a_schema_and_fits_it():
    assert {p.name for p in RULES_DIR.glob("*.yaml")} == set(SCHEMAS)
    for name, schema in SCHEMAS.items():
        assert load_rules(name, schema) is not None


@pytest.mark.parametrize("text, says", [
    ("classes:\n  - {class: gemm, match: '(unclosed'}\n", "classes.0.match"),
    ("classes:\n  - {class: gemm}\n", "classes.0.match"),
    ("classes:\n  - {class: gemm, match: x, typo: 1}\n", "classes.0.typo"),
    ("classes: [\n", "not valid YAML"),
])
def test_a_bad_rule_file_names_the_file_and_the_key(tmp_path, text, says):
    path = tmp_path / "kernel_classes.yaml"
    path.write_text(text)
    with pytest.raises(AnalysisError) as err:
        load_rules_file(path, KernelClasses)
    message = str(err.value)
    assert str(path) in message and says in message and "\n" not in message.strip()
