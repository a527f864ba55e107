"""A student's written answer as HTML: their Markdown rendered with raw HTML off, then cleaned to a short list of
tags, so what they wrote shows as text and formatting, never as markup of the page.

markdown-it-py with `html` off writes a `<script>` or `<img onerror=...>` the student typed as escaped text; nh3
(ammonia) then keeps only the tags and attributes below, and a link only when it goes to http, https or mailto (a
relative one would point into the review app itself, behind the token)."""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from grader.render.safe_text import html_text

# CommonMark with GFM tables and strikethrough; no raw HTML, no bare-URL linking (typographer's quotes left alone).
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])


def _image_as_text(self, tokens, idx, options, env) -> str:
    """An image shows as its description and address, as text: the page loads nothing from elsewhere."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    return escapeHtml(f"[{alt}]({token.attrGet('src') or ''})")


_MARKDOWN.add_render_rule("image", _image_as_text)

TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "pre", "code",
        "em", "strong", "s", "del", "a", "table", "thead", "tbody", "tr", "th", "td"}
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}   # no style (the page's CSP refuses it), class or id
LINK_SCHEMES = ("http://", "https://", "mailto:")


def _kept_attribute(tag: str, attribute: str, value: str) -> str | None:
    if tag == "a" and attribute == "href" and not value.strip().lower().startswith(LINK_SCHEMES):
        return None
    return value


def answer_html(text: str) -> Markup:
    """The answer's Markdown as safe HTML."""
    rendered = _MARKDOWN.render(html_text(text))
    cleaned = nh3.clean(rendered, tags=TAGS, attributes=ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                        attribute_filter=_kept_attribute, link_rel="noopener noreferrer nofollow",
                        strip_comments=True)
    return Markup(cleaned)
