"""The ``overlapdp`` command line (DESIGN.md data flow, step 9)."""
