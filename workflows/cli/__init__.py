"""The command line: `spyre-ci` (`main`), its options and inputs, and one module per command
(`commands/`). The top layer: it may import every other layer; nothing imports it."""
