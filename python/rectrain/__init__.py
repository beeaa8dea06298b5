"""rectrain's preprocessed shards (.rshard) from Python: the batches `rectrain train` reads.

    import rectrain
    for b in rectrain.ShardReader("train.rshard", batch=2048, shuffle=True, seed=1):
        b.labels   # float32 (n,)
        b.dense    # float32 (n, Dn)
        b.offsets[f], b.ids[f]   # int64 (n + 1,) from 0, and int32 or int64 (offsets[f][-1],)
        kjt = b.to_kjt()         # torchrec.KeyedJaggedTensor, where torchrec is importable
        inputs = b.to_embedding_bags()   # [(ids, offsets)] torch tensors for nn.EmbeddingBag

The reader is rectrain's own loader (C, through ctypes over librectrain_reader.so): the same
batches, bitwise and in the same order as training (file order, or the shuffled order of a
seed and epoch), with the file's checksums checked. A batch owns its numpy arrays (copied out
of the loader's memory, which the next batch reuses): keep batches, list(reader) them, or let
the reader go; they stay as read.
"""
from .reader import Batch, ShardReader, library_path

__all__ = ["Batch", "ShardReader", "library_path"]
