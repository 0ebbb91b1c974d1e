<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Model;

/** In-memory: which bot is enabled in which conversation. */
class BotConversationMapper {
	/** @var list<BotConversation> */
	public array $rows = [];

	/** @return list<BotConversation> */
	public function findForToken(string $token): array {
		return array_values(array_filter($this->rows, static fn (BotConversation $r): bool => $r->getToken() === $token));
	}

	public function insert(BotConversation $row): BotConversation {
		foreach ($this->rows as $existing) {
			if ($existing->getToken() === $row->getToken() && $existing->getBotId() === $row->getBotId()) {
				throw new \RuntimeException('unique constraint violation');
			}
		}
		$this->rows[] = $row;
		return $row;
	}
}
