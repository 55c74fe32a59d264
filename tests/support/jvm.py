"""One JVM per test process (JPype cannot restart it), with the ActiveMQ jars.

Every test that needs Java (the ActiveMQ selector engine, the ActiveMQ JMS
client) calls :func:`ensure_jvm` first; the classpath is the Debian
``activemq`` package's jars.
"""

from __future__ import annotations

import glob
import os

ACTIVEMQ_LIB = "/usr/share/activemq/lib"


def activemq_classpath() -> list[str]:
    """The jars of the Debian ActiveMQ package (symlinks resolved)."""
    jars = sorted(glob.glob(os.path.join(ACTIVEMQ_LIB, "*.jar")))
    jars += sorted(glob.glob(os.path.join(ACTIVEMQ_LIB, "optional", "*.jar")))
    if not jars:
        raise RuntimeError(f"no ActiveMQ jars in {ACTIVEMQ_LIB}: run scripts/install-system-deps.sh")
    return [os.path.realpath(jar) for jar in jars]


def ensure_jvm() -> None:
    """Start the JVM with the ActiveMQ classpath unless it already runs."""
    import jpype

    if jpype.isJVMStarted():
        return
    jpype.startJVM(classpath=activemq_classpath(), convertStrings=False)
