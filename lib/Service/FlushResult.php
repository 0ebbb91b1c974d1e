<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * FlushResult reports one pass over the outbox.
 */
final class FlushResult {
	/**
	 * @param array<int, array<string, mixed>> $answers the sidecar's answer per delivered row id
	 * @param list<int> $dropped ids the sidecar refused for good (see OutboxFlusher)
	 * @param bool $drained whether the outbox was empty when the pass ended
	 * @param string $error why the pass stopped early, '' when it did not
	 */
	public function __construct(
		public readonly array $answers,
		public readonly array $dropped,
		public readonly bool $drained,
		public readonly string $error,
	) {
	}

	public function delivered(): int {
		return count($this->answers);
	}

	/** @return ?array<string, mixed> */
	public function answerFor(int $id): ?array {
		return $this->answers[$id] ?? null;
	}

	public function wasDropped(int $id): bool {
		return in_array($id, $this->dropped, true);
	}
}
