def gat(*a): raise NotImplementedError
def gat_grad(*a): raise NotImplementedError
