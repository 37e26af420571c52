"""recall study (paper: mamba-measure-valued-recall.md): Mamba (S6) as measure-valued associative memory.

task.py       the recall-predict task (Def. 3.1) and the synthetic instance of App. A.1
encoding.py   query insertion (section 4.1)
students.py   the Mamba students (A.1 one-block, section 4.4 two-layer) and the softmax-attention comparator
train.py      training as A.1/A.4: make_train(config) -> train(key, train_set, val_set)
rate.py       the rate fit log L(n) = A - C (log n)^{alpha/(alpha+1)} (App. A.2, eq. (1))
"""
