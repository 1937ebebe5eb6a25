"""A YAML text with secrets masked scalar by scalar, everything else kept as written.

Why not the text rule on the whole file: `***` written where a plain scalar stood is a YAML alias,
so the run's copy of the scenario (scenario.source.yaml) no longer loaded; and a value is known to be
secret by its place (the value of `HF_TOKEN:`, the item after `--api-key`), which plain text does not
show. So the file is scanned into tokens: each scalar is masked as a value (`mask_scalar`, told its
mapping key and the scalar before it) and, when that changes it, written back quoted; comments and
the other text between scalars are masked as free text (`mask_text`). Comments, order and layout stay.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import yaml

_OPENS_MAPPING = (yaml.BlockMappingStartToken, yaml.FlowMappingStartToken)
_OPENS_SEQUENCE = (yaml.BlockSequenceStartToken, yaml.FlowSequenceStartToken)
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def quoted_scalar(value: str) -> str:
    """A YAML scalar that reads back as value wherever a scalar may stand (flow or block)."""
    if value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def masked_yaml(text: str, mask_scalar: Callable[[str, str | None, str | None], str],
                mask_text: Callable[[str], str]) -> str:
    """mask_scalar(value, key, previous): the scalar to write for value, the value of mapping key `key`
    (a sequence's items have their mapping's key; None at the top) after the scalar `previous`. Text
    that does not scan as YAML is masked as free text."""
    try:
        tokens = list(yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return mask_text(text)
    keys: list[str | None] = [None]  # the key each open mapping or sequence is under
    is_key = False
    previous: str | None = None
    out: list[str] = []
    done = 0  # text[:done] is in out
    for token in tokens:
        if isinstance(token, _OPENS_MAPPING):
            keys.append(None)
        elif isinstance(token, _OPENS_SEQUENCE):
            keys.append(keys[-1])
        elif isinstance(token, _CLOSES) and len(keys) > 1:
            keys.pop()
        elif isinstance(token, yaml.KeyToken):
            is_key = True
        elif isinstance(token, yaml.ScalarToken):
            start, end = token.start_mark.index, token.end_mark.index
            if is_key:
                keys[-1], is_key = token.value, False
                shown = mask_text(token.value)
            else:
                shown = mask_scalar(token.value, keys[-1], previous)
            previous = token.value
            out.append(mask_text(text[done:start]))
            source = text[start:end]
            if shown == token.value:
                out.append(source)
            else:
                out.append(quoted_scalar(shown) + source[len(source.rstrip()):])  # a block scalar's line ends stay
            done = end
    out.append(mask_text(text[done:]))
    return "".join(out)
