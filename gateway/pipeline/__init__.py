"""The routes and transformers as a PySpark Structured Streaming job (scale-out pipeline).

* :mod:`gateway.pipeline.settings` - the ``[pipeline]`` table and the executors' recipe;
* :mod:`gateway.pipeline.processing` - one record through the chains and routes (no Spark);
* :mod:`gateway.pipeline.kafka_source`, :mod:`~gateway.pipeline.kafka_sink`,
  :mod:`~gateway.pipeline.datasource` - Kafka for Spark through the Python data source API;
* :mod:`gateway.pipeline.job` - the session, the streaming query, the batch replay;
* :mod:`gateway.pipeline.progress` - rows/s and lag per micro-batch;
* ``jmsgateway pipeline [replay]`` is :mod:`gateway.commands.pipeline` (it loads the whole
  configuration, so it sits above this package).

Importing this package does not import Spark.
"""

from gateway.pipeline.settings import PipelineSettings, PipelineSpec, parse_pipeline_settings, pipeline_spec

__all__ = ["PipelineSettings", "PipelineSpec", "parse_pipeline_settings", "pipeline_spec"]
