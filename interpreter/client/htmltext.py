"""HTML as readable plain text, with the standard library's HTML parser (not a regex).

What a model should read of ``display(HTML(...))``: the text, with block elements on their
own lines, list items as ``- item``, table rows as ``a | b | c``, links as ``text (url)``,
entities decoded, and nothing of ``<script>`` or ``<style>``.
"""

from __future__ import annotations

from html.parser import HTMLParser

#: Elements whose start and end break the line.
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "tfoot",
        "thead",
        "tr",
        "ul",
    ]
)
#: Elements whose content is never text.
_HIDDEN = frozenset({"script", "style", "head", "title", "template", "noscript"})


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[list[str]] = [[]]
        self.hidden = 0
        self.pre = 0
        self.cells = 0
        self.href: list[str | None] = []
        #: Indexes of the lines that hold preformatted text: their leading spaces stay.
        self.pre_lines: set[int] = set()

    def _break(self) -> None:
        if self.lines[-1]:
            self.lines.append([])

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
            return
        if tag == "br":
            self.lines.append([])
            return
        if tag in _BLOCKS:
            self._break()
        if tag == "pre":
            self.pre += 1
        elif tag == "li":
            self.lines[-1].append("- ")
        elif tag == "tr":
            self.cells = 0
        elif tag in ("td", "th"):
            if self.cells:
                self.lines[-1].append(" | ")
            self.cells += 1
        elif tag == "a":
            self.href.append(dict(attrs).get("href"))
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.lines[-1].append(f"[image: {alt}]")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        elif tag == "a" and self.href:
            href = self.href.pop()
            if href and not href.startswith(("#", "javascript:")):
                self.lines[-1].append(f" ({href})")
        if tag in _BLOCKS:
            self._break()

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.pre:
            first, *rest = data.split("\n")
            self.lines[-1].append(first)
            self.pre_lines.add(len(self.lines) - 1)
            for line in rest:
                self.lines.append([line])
                self.pre_lines.add(len(self.lines) - 1)
            return
        text = " ".join(data.split())
        if not text:
            if data and self.lines[-1] and not self.lines[-1][-1].endswith(" "):
                self.lines[-1].append(" ")
            return
        if data[:1].isspace() and self.lines[-1] and not self.lines[-1][-1].endswith(" "):
            text = " " + text
        if data[-1:].isspace():
            text += " "
        self.lines[-1].append(text)


def html_to_text(html: str) -> str:
    """The readable text of an HTML fragment or document."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    out: list[str] = []
    for index, parts in enumerate(parser.lines):
        line = "".join(parts)
        # Preformatted text keeps its indentation (code, aligned columns).
        line = line.rstrip() if index in parser.pre_lines else line.strip()
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip("\n")
