import { ZxcvbnFactory } from '@zxcvbn-ts/core';
import * as common from '@zxcvbn-ts/language-common';
import * as en from '@zxcvbn-ts/language-en';
import { randomBytes } from 'node:crypto';
const t0 = performance.now();
const z = new ZxcvbnFactory({ dictionary: { ...common.dictionary, ...en.dictionary }, graphs: common.adjacencyGraphs, translations: en.translations });
const keys = ['qwertyuiopasdfghjklzxcvbnm123456','aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpP','Password1234567890Password!@#$%^','correcthorsebatterystaple1234567','test-admin-key-0123456789abcdefghijklmnop','1qaz2wsx3edc4rfv5tgb6yhn7ujm8ik,','zxcvbnmasdfghjklqwertyuiop098765','trustno1letmein!sunshine2024abcd', 'iloveyouiloveyou1234567890abcdef','monkeydragonbaseballfootball1234'];
for (const k of keys) console.log(z.check(k).guessesLog10.toFixed(1), k);
let min = 99;
for (let i = 0; i < 2000; i++) for (const k of [randomBytes(16).toString('hex'), randomBytes(24).toString('base64'), randomBytes(32).toString('base64url')]) { const g = z.check(k).guessesLog10; if (g < min) { min = g; console.log('rand', g.toFixed(1), k); } }
console.log('ms', performance.now() - t0);
