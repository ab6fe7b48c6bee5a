"""dlpx.conform: a DLPack conformance kit for producers and consumers.

``python -m dlpx.conform numpy torch …`` prints a table per library. From a test suite::

    from dlpx.conform import check_producer, check_consumer
    assert check_producer(lambda shape, dtype: make_my_array(shape, dtype)).ok
    assert check_consumer(my_from_dlpack).ok

Each entry of the returned list is a :class:`Check` (name, status, detail, clause, required).
:class:`ReferenceTensor` / :class:`ReferenceProducer` build DLPack producers field by field,
malformed ones included, for hostile-producer tests.
"""

from .consumer import check_consumer
from .producer import check_producer
from .reference import ReferenceProducer, ReferenceTensor, STRAY_DELETES, settle
from .results import Check, Checks

__all__ = ["check_producer", "check_consumer", "Check", "Checks", "ReferenceTensor", "ReferenceProducer", "STRAY_DELETES", "settle"]
