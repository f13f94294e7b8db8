"""A PyTorch workload run step by step for bench/torch.ts: the time and the page faults of every step, then
one JSON line on stdout (steps, msPerStep, faultsPerStep, maxRssKiB, checksum).

usage: python3 bench/torch/steps.py MODEL STEPS THREADS
models:
  cnn      training: three convolutions with batch norm, SGD with momentum, batch 32 of 3x64x64
  lstm     training: an LSTM language model (vocabulary 2000, hidden 256), Adam, batch 8 of 20 tokens
  encoder  inference: a 4-layer transformer encoder (d 256) on sequences of 17, 128, 64, 200, 9, 96
           tokens in turn (a dynamic shape per step)
  encoder-train  training: a 6-layer transformer encoder (d 512, 8 heads, feed-forward 2048) under a token
           embedding (vocabulary 1000) and a per-token classifier, AdamW, batch 4 of 256 tokens
  encoder-lm     training: a 6-layer transformer encoder (d 256, 8 heads, feed-forward 1024) as a language
           model over 8000 tokens, AdamW, batch 8 of 256 tokens (its attention maps and logits, 16 and
           62.5 MiB, are most of the step's memory)

Any script that prints the same JSON line as its last line of stdout can take its place (--script).
The checksum (the parameters' sum after training, or the last output's sum) shows whether an allocator
changed a result; it is printed as a hexadecimal float so that equal means bit-equal."""
import json
import resource
import sys
import time

import torch


def cnn():
    layers = [torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(128, 256, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
              torch.nn.Flatten(), torch.nn.Linear(256, 10)]
    model = torch.nn.Sequential(*layers)
    x, y = torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,))
    return training(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), lambda: torch.nn.functional.cross_entropy(model(x), y))


def lstm():
    class LanguageModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(2000, 128)
            self.rnn = torch.nn.LSTM(128, 256, 1, batch_first=True)
            self.out = torch.nn.Linear(256, 2000)

        def forward(self, tokens):
            return self.out(self.rnn(self.embed(tokens))[0])

    model = LanguageModel()
    x, y = torch.randint(0, 2000, (8, 20)), torch.randint(0, 2000, (8, 20))
    loss = lambda: torch.nn.functional.cross_entropy(model(x).reshape(-1, 2000), y.reshape(-1))
    return training(model, torch.optim.Adam(model.parameters(), lr=1e-3), loss)


def token_encoder(vocabulary, d, heads, feed_forward, batch, tokens):
    """Training of a 6-layer transformer encoder between a token embedding and a per-token classifier over
    the vocabulary (a language model's head), AdamW, on one batch of random tokens."""

    class TokenEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocabulary, d)
            layer = torch.nn.TransformerEncoderLayer(d, heads, feed_forward, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 6)
            self.out = torch.nn.Linear(d, vocabulary)

        def forward(self, x):
            return self.out(self.encoder(self.embed(x)))

    model = TokenEncoder()
    x, y = torch.randint(0, vocabulary, (batch, tokens)), torch.randint(0, vocabulary, (batch, tokens))
    loss = lambda: torch.nn.functional.cross_entropy(model(x).reshape(-1, vocabulary), y.reshape(-1))
    return training(model, torch.optim.AdamW(model.parameters(), lr=1e-4), loss)


def training(model, optimizer, loss):
    def step():
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()

    def checksum():
        with torch.no_grad():
            return sum(float(p.double().sum()) for p in model.parameters())

    return step, checksum


def encoder():
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).eval()
    lengths = [17, 128, 64, 200, 9, 96]
    inputs = [torch.randn(2, n, 256) for n in lengths]
    state = {"step": 0, "last": None}

    def step():
        with torch.no_grad():
            state["last"] = model(inputs[state["step"] % len(inputs)])
        state["step"] += 1

    return step, lambda: float(state["last"].double().sum())


MODELS = {
    "cnn": cnn,
    "lstm": lstm,
    "encoder": encoder,
    "encoder-train": lambda: token_encoder(1000, 512, 8, 2048, 4, 256),
    "encoder-lm": lambda: token_encoder(8000, 256, 8, 1024, 8, 256),
}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in MODELS or not sys.argv[2].isdigit() or not sys.argv[3].isdigit():
        sys.exit(f"usage: steps.py {{{'|'.join(MODELS)}}} STEPS THREADS")
    torch.set_num_threads(int(sys.argv[3]))
    torch.manual_seed(0)
    step, checksum = MODELS[sys.argv[1]]()
    ms, faults = [], []
    for _ in range(int(sys.argv[2])):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    result = {"steps": len(ms), "msPerStep": ms, "faultsPerStep": faults,
              "maxRssKiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "checksum": checksum().hex()}
    print(json.dumps(result))


main()
