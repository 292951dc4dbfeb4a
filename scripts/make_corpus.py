#!/usr/bin/env python3
"""Generates examples/corpus/corpus.txt: short English-like stories from a
small grammar, the demo corpus a tiny GPT learns in minutes.

The stories have structure a model can pick up at several ranges: spelling
and a modest vocabulary (a few hundred words), agreement (a character's name
and pronoun stay the same through its story), dialogue in quotes, and a
plot shape (setting, a problem, a helper, an ending). The generator is
deterministic: its own PRNG (SplitMix64), no dependence on Python's random
module, so the same file comes out everywhere.

Usage: scripts/make_corpus.py [--stories N] [--seed S] [-o PATH]
Prints the size and the byte unigram entropy (bits and nats per byte): the
loss a model that knows only byte frequencies would reach.
"""
import argparse
import collections
import math
import os
import sys

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n  # bias below 2^-40 for these small n

    def pick(self, items):
        return items[self.below(len(items))]

    def chance(self, percent):
        return self.below(100) < percent


# Characters: (name, pronoun set).
HE = ("he", "him", "his")
SHE = ("she", "her", "her")
NAMES = [("Tom", HE), ("Sam", HE), ("Ben", HE), ("Max", HE), ("Leo", HE),
         ("Jack", HE), ("Tim", HE), ("Finn", HE), ("Lily", SHE),
         ("Mia", SHE), ("Anna", SHE), ("Lucy", SHE), ("Sara", SHE),
         ("Emma", SHE), ("Zoe", SHE), ("Rosa", SHE)]
KINDS = ["little girl", "little boy", "small rabbit", "young fox",
         "brave mouse", "happy dog", "curious cat", "tiny bird",
         "kind bear", "clever duck", "shy frog", "big turtle"]
KIND_PRONOUN = {"little girl": SHE, "little boy": HE}
PLACES = ["a small house", "a big forest", "a quiet village", "a green farm",
          "a busy town", "a cozy den", "a sunny meadow", "an old barn"]
LANDMARKS = ["the river", "the hill", "the lake", "the park", "the sea",
             "the old tree", "the garden", "the bridge"]
LIKES = ["play with a red ball", "run in the grass", "sing songs",
         "look at the clouds", "pick flowers", "read books",
         "draw pictures", "jump in the puddles", "climb trees",
         "watch the birds", "build towers with blocks", "bake cookies"]
ADJECTIVES = ["shiny", "old", "tiny", "big", "soft", "strange", "pretty",
              "broken", "bright", "heavy"]
OBJECTS = ["box", "key", "stone", "kite", "hat", "shell", "feather",
           "map", "bell", "cup", "toy boat", "blanket"]
FOUND_AT = ["under a bush", "near the door", "in the sand",
            "behind a rock", "by the water", "on the path", "in a hole"]
PROBLEMS = [
    ("the {obj} was stuck in a tall tree", "could not reach it",
     "climbed up and got the {obj} down"),
    ("the {obj} fell into the water", "could not swim",
     "pulled the {obj} out with a long stick"),
    ("the wind blew the {obj} away", "could not run fast enough",
     "ran after it and caught the {obj}"),
    ("the {obj} was too heavy to carry", "was too small",
     "helped carry the {obj} home"),
    ("the {obj} was lost in the tall grass", "could not find it",
     "looked and looked until the {obj} was found"),
]
FEELINGS_BAD = ["sad", "worried", "upset", "scared"]
FEELINGS_GOOD = ["happy", "glad", "proud", "thankful"]
# Helpers: (first mention, later mentions).
HELPERS = [("Mom", "Mom"), ("Dad", "Dad"), ("Grandpa", "Grandpa"),
           ("Grandma", "Grandma"), ("a wise owl", "the owl"),
           ("a friendly cow", "the cow"), ("a big dog", "the dog"),
           ("an old man", "the old man"), ("a kind girl", "the girl")]
ENDINGS = [
    "From that day on, {name} and {helper} were best friends.",
    "{Name} learned that it is good to ask for help.",
    "{Name} learned that sharing makes everyone happy.",
    "That night, {name} went to bed with a big smile.",
    "{Name} kept the {obj} safe and never lost it again.",
    "They played together until the sun went down.",
]
# Said with a comma or an exclamation mark before the closing quote.
SAYINGS = ["Thank you so much", "You are a good friend",
           "I am so happy now", "Let us play together",
           "I will never forget this"]
WEATHER = ["The sun was warm.", "It was a cold morning.",
           "The sky was blue.", "It was raining a little.",
           "The wind was soft.", "Snow covered the ground."]
NUMBERS = ["two", "three", "four", "five"]


def cap(text):
    return text[:1].upper() + text[1:]


def story(rng):
    name, pronouns = rng.pick(NAMES)
    kind = rng.pick(KINDS)
    pronouns = KIND_PRONOUN.get(kind, pronouns)
    he, him, his = pronouns
    obj = rng.pick(OBJECTS)
    adj = rng.pick(ADJECTIVES)
    helper_first, helper = rng.pick(HELPERS)
    problem, cannot, fix = rng.pick(PROBLEMS)
    article = "an" if adj[0] in "aeiou" else "a"
    s = []
    opener = rng.pick(["Once upon a time", "Long ago",
                       "There once was a time when"])
    if opener == "There once was a time when":
        s.append(f"There once was a {kind} named {name}.")
    else:
        s.append(f"{opener}, there was a {kind} named {name}.")
    s.append(f"{cap(he)} lived in {rng.pick(PLACES)} near "
             f"{rng.pick(LANDMARKS)}.")
    if rng.chance(50):
        s.append(rng.pick(WEATHER))
    s.append(f"Every day, {name} liked to {rng.pick(LIKES)}.")
    if rng.chance(40):
        s.append(f"{cap(he)} also had {rng.pick(NUMBERS)} friends who "
                 f"liked to {rng.pick(LIKES)}.")
    s.append(f"One day, {name} found {article} {adj} {obj} "
             f"{rng.pick(FOUND_AT)}.")
    s.append(f"\"What a {adj} {obj}!\" {name} said. \"I will keep it.\"")
    s.append(f"But then {problem.format(obj=obj)}.")
    feeling = rng.pick(FEELINGS_BAD)
    s.append(f"{name} {cannot}. {cap(he)} felt {feeling}.")
    if rng.chance(50):
        s.append(f"\"Oh no, what can I do?\" {he} said.")
    s.append(f"Then {helper_first} came by and asked, \"Why are you "
             f"{feeling}, {name}?\"")
    s.append(f"{name} told {helper} about the {obj}.")
    s.append(f"{cap(helper)} {fix.format(obj=obj)}.")
    mark = rng.pick([",", "!"])
    s.append(f"{name} felt {rng.pick(FEELINGS_GOOD)}. "
             f"\"{rng.pick(SAYINGS)}{mark}\" {he} said to {helper}.")
    ending = rng.pick(ENDINGS)
    s.append(ending.format(name=name, Name=name, helper=helper, obj=obj))
    return " ".join(s)


def entropy(data):
    counts = collections.Counter(data)
    total = len(data)
    bits = -sum(c / total * math.log2(c / total) for c in counts.values())
    return bits, bits * math.log(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=1400)
    parser.add_argument("--seed", type=int, default=20240520)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("-o", "--output",
                        default=os.path.join(root, "examples", "corpus",
                                             "corpus.txt"))
    args = parser.parse_args()
    rng = SplitMix64(args.seed)
    text = "\n\n".join(story(rng) for _ in range(args.stories)) + "\n"
    data = text.encode("ascii")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".tmp", "wb") as f:
        f.write(data)
    os.replace(args.output + ".tmp", args.output)
    bits, nats = entropy(data)
    words = len(text.split())
    vocab = len(set(w.strip('.,!?"').lower() for w in text.split()))
    print(f"{args.output}: {len(data)} bytes, {args.stories} stories, "
          f"{words} words, {vocab} distinct words, {len(set(data))} distinct "
          f"bytes")
    print(f"byte unigram entropy: {bits:.4f} bits/byte = {nats:.4f} "
          f"nats/byte")


if __name__ == "__main__":
    sys.exit(main())
