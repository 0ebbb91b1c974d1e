<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use Psr\Log\AbstractLogger;

/** PSR-3 logger that keeps every record, to assert on levels and on the absence of secrets. */
final class RecordingLogger extends AbstractLogger {
	/** @var list<array{level: string, message: string, context: array}> */
	public array $records = [];

	public function log($level, $message, array $context = []): void {
		$this->records[] = ['level' => (string)$level, 'message' => (string)$message, 'context' => $context];
	}

	/** Everything logged, context included, as one string. */
	public function dump(): string {
		$out = '';
		foreach ($this->records as $record) {
			$context = $record['context'];
			if (isset($context['exception']) && $context['exception'] instanceof \Throwable) {
				$context['exception'] = get_class($context['exception']) . ': ' . $context['exception']->getMessage();
			}
			$out .= $record['level'] . ' ' . $record['message'] . ' ' . json_encode($context) . "\n";
		}
		return $out;
	}

	/** @return list<string> messages at a level */
	public function messages(string $level): array {
		return array_values(array_map(
			static fn (array $r): string => $r['message'],
			array_filter($this->records, static fn (array $r): bool => $r['level'] === $level),
		));
	}
}
