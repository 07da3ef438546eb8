"""What crosses bot → Redis → worker: commands, requests, identities, ids.

Importable without kubernetes_asyncio, rq or slack_sdk (tests/test_contracts.py
checks it), so front ends — the Bolt app and `taubot shell` — depend on this
package and on `workers.plumbing.jobqueue` only, and a job never imports a front end.
"""
