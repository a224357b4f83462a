from cvdiag.showcase import *
