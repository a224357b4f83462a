from cvdiag.showcase.bootstrap import *
