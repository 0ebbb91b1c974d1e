<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Migration\IOutput;

/** IOutput of a repair step or migration, kept per level. */
final class RecordingOutput implements IOutput {
	/** @var list<array{0: string, 1: string}> */
	public array $lines = [];

	public function debug(string $message): void {
		$this->lines[] = ['debug', $message];
	}

	public function info($message) {
		$this->lines[] = ['info', (string)$message];
	}

	public function warning($message) {
		$this->lines[] = ['warning', (string)$message];
	}

	public function startProgress($max = 0) {
	}

	public function advance($step = 1, $description = '') {
	}

	public function finishProgress() {
	}

	/** @return list<string> */
	public function of(string $level): array {
		return array_values(array_map(static fn (array $l): string => $l[1], array_filter($this->lines, static fn (array $l): bool => $l[0] === $level)));
	}
}
