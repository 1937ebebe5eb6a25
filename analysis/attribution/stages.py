"""The stages a step can be, named once: what SGLang's forward mode says the step ran.

Why here: the stage names were written out in five files (the table's stage choice, the MTP rows,
the per-token cost, the load comparison, the layer-count checks); a stage renamed in one and not
the others would leave a table silently without its MTP rows. Which step label names which stage is
data (analysis/data/rules/step_labels.yaml); tests/test_stages.py checks that every stage a label
names is one of these.
"""
from __future__ import annotations

DECODE, EXTEND, VERIFY = "decode", "extend", "target_verify"
DRAFT, DRAFT_EXTEND = "draft", "draft_extend"  # the MTP draft model's passes
IDLE, PREBUILT = "idle", "prebuilt"  # a data-parallel rank with no sequences; a disaggregated decode's ready batch
UNKNOWN = "unknown"  # a step with no stage label
STAGES = frozenset({DECODE, EXTEND, VERIFY, DRAFT, DRAFT_EXTEND, IDLE, PREBUILT})

DRAFT_STAGES = (DRAFT, DRAFT_EXTEND)  # their layers are the draft model's (its own layer count)
TABLE_STAGES = (VERIFY, DECODE, EXTEND)  # the stage a D4 table describes, the first with usable steps
OLDER_VERIFY = "verify"  # a verify step's stage in tables saved before the VERIFY label was mapped to VERIFY
BATCH_STAGES = (DECODE, VERIFY, OLDER_VERIFY)  # steps that run the scenario's batch (not draft or prefill steps)
