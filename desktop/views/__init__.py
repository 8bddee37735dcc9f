"""Windows beside the main one: side-by-side sampling comparison, beam search and the branch
tree."""
