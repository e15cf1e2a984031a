def softmax(*a): raise NotImplementedError
def softmax_grad(*a): raise NotImplementedError
