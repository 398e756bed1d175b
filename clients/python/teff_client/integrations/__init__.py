"""Trainer integrations: each creates or resumes the run from what the framework knows and reports
throughput through a :class:`~teff_client.reporter.Reporter`. The frameworks are imported only by
the module that needs them (``integrations.transformers``, ``integrations.lightning``,
``integrations.torch``)."""
