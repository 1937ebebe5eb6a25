"""Just enough SVG and HTML writing for the page: escaped text and attributes, numbers kept short."""
from __future__ import annotations

import html


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def num(value: float) -> str:
    """A coordinate: two decimals, no trailing zeros (keeps the page small)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def attrs(**values) -> str:
    """ class_="x" data_layer=3 -> ' class="x" data-layer="3"' (None values are left out)."""
    out = []
    for key, value in values.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        out.append(f' {name}="{esc(num(value) if isinstance(value, float) else value)}"')
    return "".join(out)


def el(tag: str, body: str = "", **values) -> str:
    return f"<{tag}{attrs(**values)}>{body}</{tag}>"


def title(text: str) -> str:
    """A tooltip: the browser shows it on hover, no script needed."""
    return el("title", esc(text))


def bilingual(style, key: str, tag: str = "span", **values) -> str:
    """The same words in English and Chinese; the page's language switch shows one (CSS classes en / zh)."""
    return "".join(el(tag, esc(style.word(lang, key, **values)), class_=lang) for lang in ("en", "zh"))


def bilingual_text(style, key: str, values: dict, **attrs) -> str:
    """An SVG label in English and Chinese, one <text> each; the page's language switch shows one."""
    return "".join(el("text", esc(style.word(lang, key, **values)), class_=f"{attrs.get('class_', '')} {lang}".strip(),
                      **{k: v for k, v in attrs.items() if k != "class_"}) for lang in ("en", "zh"))
