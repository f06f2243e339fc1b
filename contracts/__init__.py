"""Shared contracts: the records and codecs several packages read and write, and the error
types that cross package boundaries.

- `event`   TriggerEvent and ChangedFile, with their JSON codec
- `errors`  Unavailable (a service is down: an outage, never bad input) and Refused

Plain data only: no I/O, no third-party imports, never torch. Every package may import
this one; it imports none of them.
"""
