"""Helpers that several test modules share (tests/ is on pytest's path: ``from support.service import
...``). Test modules import helpers from here, never from one another, so that running or moving one
test file never depends on another."""
