import sys

from llm_lens.desktop.cli import main

sys.exit(main())
