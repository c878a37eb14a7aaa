"""Renderers of an audit: files for machines (CSV, JSON), Markdown and terminal text for people."""
