"""Renderers: the typed summary of an audit for people (terminal, Markdown) and machines (CSV, JSON),
and the live status line of a run in progress."""
