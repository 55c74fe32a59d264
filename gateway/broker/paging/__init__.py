"""Paging of the embedded broker: the page file where queues put what does not
fit in memory (:mod:`.page_file`) and its record format (:mod:`.page_records`)."""
