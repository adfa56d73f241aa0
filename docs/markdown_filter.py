#!/usr/bin/env python3
"""Doxygen's input filter for the Markdown pages (Doxyfile: FILTER_PATTERNS).

README.md and docs/*.md are written for GitHub, whose links to a section use the heading's slug
(`[Training](#training)`, `docs/backends.md#the-contract`). Doxygen 1.9 gives headings no such
ids, so this filter, run on each page as Doxygen reads it (the files are not changed):
  - labels every heading that has none: `{#<page>-<slug>}`, and the page's title `{#<page>}`,
    where <page> is the file's stem in lower case (`readme`, `scaling`, ...);
  - points links to sections at those labels: `(#slug)` in the same page, `(other.md#slug)` and
    `(other.md)` to another page of the site;
  - writes links to files that are not pages of the site (LICENSE, benchmarks/RESULTS.md) as
    their repository path in code font, since the HTML reference has no copy of them;
  - adds a table of contents to pages with three or more sections, and names the README's page
    "Overview and tour (README)".
Fenced code blocks pass through unchanged.
"""
import os
import re
import sys

HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*$")
LABELLED = re.compile(r"\{#[\w-]+\}$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")
LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")


def page_name(path):
    return os.path.splitext(os.path.basename(path))[0].lower().replace("_", "-")


def slug(text):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\{#[\w-]+\}$", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def title_label(path):
    """The label of a page: its title's {#label} where it has one, else its page name."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = HEADING.match(line.rstrip("\n"))
            if m:
                label = re.search(r"\{#([\w-]+)\}$", m.group(2))
                return label.group(1) if label else page_name(path)
    return page_name(path)


def site_pages(root):
    """The Markdown files of the site, by their path relative to the repository root."""
    pages = {"README.md"}
    docs = os.path.join(root, "docs")
    for name in os.listdir(docs):
        if name.endswith(".md"):
            pages.add("docs/" + name)
    return pages


def main(path):
    root = os.getcwd()  # Doxygen runs in the repository root (scripts/docs.sh)
    here = os.path.relpath(os.path.abspath(path), root)
    page = page_name(here)
    pages = site_pages(root)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")

    # Headings outside fenced code, with the slug GitHub gives each (repeats get -1, -2, ...).
    fenced = False
    headings = {}
    seen = {}
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and HEADING.match(line):
            s = slug(HEADING.match(line).group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            headings[i] = s if n == 0 else f"{s}-{n}"
    sections = sum(1 for i in headings if lines[i].startswith("## "))

    def link(m):
        text, target = m.group(1), m.group(2)
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            return m.group(0)
        file, _, fragment = target.partition("#")
        if not file:  # a section of this page
            return f"[{text}](#{page}-{fragment})"
        resolved = os.path.normpath(os.path.join(os.path.dirname(here), file))
        if resolved in pages:
            if fragment:
                return f"[{text}](#{page_name(resolved)}-{fragment})"
            return f"[{text}](#{title_label(os.path.join(root, resolved))})"
        shown = f"`{resolved}`"
        return shown if text.strip("`") == resolved else f"{text} ({shown})"

    out = []
    fenced = False
    titled = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        if fenced:
            out.append(line)
            continue
        if i in headings:
            hashes, text = HEADING.match(line).groups()
            if not titled and hashes == "#":
                titled = True
                if here == "README.md":
                    text = "Overview and tour (README)"
                if not LABELLED.search(text):
                    text += f" {{#{page}}}"
                out.append(f"{hashes} {text}")
                if sections >= 3:
                    out += ["", "[TOC]"]
                continue
            if not LABELLED.search(text):
                text += f" {{#{page}-{headings[i]}}}"
            out.append(f"{hashes} {text}")
            continue
        out.append(LINK.sub(link, line))
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
