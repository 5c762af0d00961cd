"""Use cases shared by the API and the CLI: submit, query, cancel, logs, tokens.

Services validate, talk to the store in short transactions, and wake the
controller. They never call Docker inside a transaction.
"""
