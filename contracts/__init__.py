"""Shared contracts: the records and codecs several packages read and write, and the error
types that cross package boundaries.

- `codec`           the one JSON codec of the records (missing and extra keys, wire hooks)
- `event`           TriggerEvent and ChangedFile
- `errors`          Unavailable (a service is down: an outage, never bad input) and Refused
- `exit_codes`      ExitCode, one meaning per code for every command
- `classification`  Classification of a failing variant: new, pre-existing, flaky
- `tested`          Tested, the verdict on the change under test: tested, partial, not_tested
- `change`          ChangeNote (the change under test as the records carry it), ChangeState
- `backend`         BackendId, the backend under test (package, version, device, digest)
- `forensics`       FailureForensics, TriageVerdict: a run's forensics and triage verdict
- `run_summary`     RunSummary, History's summary of a run in parts

Plain data only: no I/O, no third-party imports, never torch. Every package may import
this one; it imports none of them.
"""
