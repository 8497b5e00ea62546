"""The orchestrators of several domains: building a model call's context (session history,
long-term memory, budgets) and running invocations (context, prefix cache, the model,
ingestion), with their API views. The runner owns no models."""
