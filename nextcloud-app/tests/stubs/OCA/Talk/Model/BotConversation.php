<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Model;

class BotConversation {
	private int $botId = 0;
	private string $token = '';
	private int $state = 0;

	public function setBotId(int $botId): void {
		$this->botId = $botId;
	}

	public function getBotId(): int {
		return $this->botId;
	}

	public function setToken(string $token): void {
		$this->token = $token;
	}

	public function getToken(): string {
		return $this->token;
	}

	public function setState(int $state): void {
		$this->state = $state;
	}

	public function getState(): int {
		return $this->state;
	}
}
