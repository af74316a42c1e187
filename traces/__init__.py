"""Trace readers/writers (Gavel, Tiresias, Pollux/Sia, Philly-derived),
generators and throughput tables. See traces/io.py for format detection."""
