"""Shared helpers for the OFA visual-entailment prototype (reference env: ./venv, see setup_ref_env.sh).

Pre-processing here is a PIL+numpy transcription of modelscope 1.40.2
modelscope/preprocessors/ofa/visual_entailment.py (+ base.py); scoring is a transcription of
OfaForAllTasks._traverse_inference (modelscope/models/multi_modal/ofa_for_all_tasks.py:352-440),
which cannot be imported here (its package imports librosa/torchaudio/torchvision).
"""
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "third_party"))  # fairseq-fixed source tree (pure python)

ANS2LABEL = {"no": 0, "yes": 1, "maybe": 2}  # OFA tasks/mm_tasks/snli_ve.py default ans2label_dict
ANSWER_TO_RELATION = {"yes": "entailment", "no": "contradiction", "maybe": "neutral"}
PROMPT = ' does the image describe " {} "?'
PROMPT_PREMISE = ' can image and text1 " {} " imply text2 " {} "?'


def pre_caption(caption, max_words=None):
    # modelscope/preprocessors/ofa/base.py:137-175 (OfaBasePreprocessor.pre_caption)
    caption = caption.lower().lstrip(',.!?*#:;~').replace('-', ' ') \
        .replace('/', ' ').replace('<person>', 'person')
    caption = re.sub(r'\s{2,}', ' ', caption)
    caption = caption.rstrip('\n')
    caption = caption.strip(' ')
    caption_words = caption.split(' ')
    if max_words is not None and len(caption_words) > max_words:
        caption = ' '.join(caption_words[:max_words])
    return caption


def build_prompt(hypothesis, premise=None, max_src_length=256):
    # visual_entailment.py:140-154 ('text' = hypothesis, optional 'text2' = premise/caption)
    if premise is None:
        return PROMPT.format(pre_caption(hypothesis, max_src_length))
    return PROMPT_PREMISE.format(pre_caption(premise, max_src_length), pre_caption(hypothesis, max_src_length))


def patch_image(img, size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """torchvision Compose([convert RGB, Resize((s,s), BICUBIC), ToTensor, Normalize]) on a PIL image.
    torchvision's Resize on a PIL image calls PIL Image.resize((w,h), BICUBIC), so this is exact."""
    from PIL import Image
    img = img.convert('RGB').resize((size, size), Image.BICUBIC)
    a = np.asarray(img, dtype=np.float32) / 255.0
    a = (a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return a.transpose(2, 0, 1).copy()


def train_tiny_bpe(out_dir, vocab_size=800):
    """Tiny GPT-2-style byte-level BPE (vocab.json + merges.txt, BART special tokens 0..3)."""
    from tokenizers import ByteLevelBPETokenizer
    corpus = [
        'does the image describe " a dog on the beach "?', 'can image and text1 " two birds " imply text2 " animals "?',
        'yes no maybe', 'there are two birds.', 'a man is riding a horse in a field', 'the cat sleeps on a red sofa',
        'people are playing football on grass', 'a woman holds an umbrella in the rain', 'yes', 'no', 'maybe', 'answer yes or no or maybe', 'it is yes', 'say no', 'well maybe',
    ] * 20
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    os.makedirs(out_dir, exist_ok=True)
    tok.save_model(out_dir)
    # BART's vocab ends with <mask>; append it so BartTokenizer does not add it as an extra token
    vocab = json.load(open(os.path.join(out_dir, "vocab.json")))
    vocab["<mask>"] = len(vocab)
    json.dump(vocab, open(os.path.join(out_dir, "vocab.json"), "w"), ensure_ascii=False)
    return out_dir


def load_ofa_tokenizer(model_dir):
    """modelscope's OFATokenizer exactly as OfaBasePreprocessor/OfaForAllTasks build it (base.py:42-50)."""
    from modelscope.models.multi_modal.ofa import OFATokenizer
    tok = OFATokenizer.from_pretrained(model_dir)
    tok.add_tokens([f'<code_{i}>' for i in range(8192)])
    tok.add_tokens([f'<bin_{i}>' for i in range(1000)])
    return tok


def tokenize_text(tok, text, max_src_length=256, add_bos=True, add_eos=True):
    # base.py:107-134
    ids = tok(text, max_length=max_src_length, add_special_tokens=False, truncation=True)['input_ids']
    return ([tok.bos_token_id] if add_bos else []) + ids + ([tok.eos_token_id] if add_eos else [])


def answer_token_ids(tok):
    """ids of ' no', ' yes', ' maybe' (ofa_for_all_tasks.py:448-452 tokenizes ' ' + answer)."""
    out = []
    for ans in ANS2LABEL:
        ids = tok(' ' + ans, add_special_tokens=False)['input_ids']
        out.append(ids)
    return out
