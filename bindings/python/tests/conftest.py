import os
import sys

# Make the package importable from a source checkout without installing it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
