"""Slack: approval requests out, signed button clicks in.

Importing this package is cheap and safe everywhere (the workflow sandbox included):
`contracts` and `config` use pydantic only. The bridge (`app`, `server`) and the Web API
client (`webapi`) import slack_bolt / slack_sdk and are imported only where they run.
"""
