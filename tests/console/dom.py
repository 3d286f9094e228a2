"""A little DOM reading for the test-client tests: the elements of a page with their
attributes and text (html.parser, so what a browser would parse, unescaped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"input", "meta", "link", "br", "img", "rect", "hr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list["Element"])


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.all: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.all.append(element)
        if self.open:
            self.open[-1].children.append(element)
        if tag not in _VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.text += data


def parse(html: str) -> list[Element]:
    """Every element of ``html``, in document order."""
    collector = _Collector()
    collector.feed(html)
    return collector.all


def select(html: str, tag: str, **attrs: str) -> list[Element]:
    """The elements ``tag`` whose attributes include ``attrs`` (``class_`` for class; a
    class matches one of the element's classes)."""
    found: list[Element] = []
    for element in parse(html):
        if element.tag == tag and all(_has(element, k, v) for k, v in attrs.items()):
            found.append(element)
    return found


def _has(element: Element, name: str, want: str) -> bool:
    if name == "class_":
        return want in element.attrs.get("class", "").split()
    return element.attrs.get(name.replace("_", "-")) == want


def text_of(html: str, tag: str, **attrs: str) -> str:
    """The whitespace-normalized text of the one element that matches."""
    [element] = select(html, tag, **attrs)
    return " ".join(element.text.split())
